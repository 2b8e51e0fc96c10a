"""Programs the tests run in a fresh Python (`python -m tests.scripts.NAME` from the repository root): a device
count fixed when JAX starts, a restarted process, thread pools sized at start-up, what an import pulls in. Each
prints one JSON object (or the line its test reads) as its last line of output; see tests.helpers.run_script."""
