"""Tasks: datasets and generators the models are trained and evaluated on."""
