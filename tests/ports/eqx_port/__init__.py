"""An Equinox port of tiny_decoder.py split over modules: norm, attention, model."""
