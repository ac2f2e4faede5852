"""Task modules loaded by entrypoint subprocesses (``--resolver ... -- task-module <mod> task-name <name>``)."""
