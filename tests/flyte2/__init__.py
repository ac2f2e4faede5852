"""Tests of the Flyte 2 flavour (``flyteplugins.rootcause``) and the engine parts it brought."""
