"""Gradio entry point (also the Space's app_file): build the playground page and serve it, with the
OpenAI-compatible API on the same server."""

from playground import device, host

host.apply_thread_limits()  # before torch or jax start their thread pools: sized to the container's CPUs
device.configure_process()  # before JAX starts its backends

from playground.ui import serving, warmup  # noqa: E402 - after the thread limits, by design

# queued here, not under __main__, so a host that imports this module and launches `demo` itself gets the same
# queue (the API's routes come with serving.launch)
demo = serving.build_app()
warmup.start()  # PLAYGROUND_WARMUP=1 (default on a Space): compile the default columns and the presets on JAX

if __name__ == "__main__":
    serving.launch(demo)
