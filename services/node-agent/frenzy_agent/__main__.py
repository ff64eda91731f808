from frenzy_agent.service import main

main()
