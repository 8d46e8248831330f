"""Activity worker runtime, effect store and retry classification."""
