"""Flyte 2 tasks for tests that need a pod to misbehave in ways the simulation's faults do not."""
