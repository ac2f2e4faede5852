"""Worker functions, scripts and Flyte tasks for the teardown, watchdog and process-settings tests."""
