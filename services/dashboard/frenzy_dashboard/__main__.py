from frenzy_dashboard.service import main

main()
