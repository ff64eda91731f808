from frenzy_predictor.service import main

main()
