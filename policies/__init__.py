"""The scheduling brain shared by the simulator and the GPU runtime: request state, KV pages,
the batcher that builds each pass, and the speculation policies."""
