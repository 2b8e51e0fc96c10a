"""The engine: device weights, compiled programs (the kernel, the program and disk caches, compiling), tensor
parallelism, int8 weights."""
