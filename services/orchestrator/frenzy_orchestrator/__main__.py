from frenzy_orchestrator.service import main

main()
