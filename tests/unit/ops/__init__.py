"""Unit tests of ops: the tools around the product (bench, dev stack, fakes, compose file)."""
