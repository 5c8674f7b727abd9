"""The shipped classifier weights (`classifier.json`, format toolgate-guard-linear/1)."""
