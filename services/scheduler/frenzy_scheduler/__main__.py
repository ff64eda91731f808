from frenzy_scheduler.service import main

main()
