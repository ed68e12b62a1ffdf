"""Rollout workers: a method's share of an update, serially or on Ray."""
