"""Rollout workers: each learned method's share of an update, serially or on Ray."""
