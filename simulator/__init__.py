"""The simulated world: SimPy clock, replicas and router, cost models (time) and acceptance models
(outcomes) behind the same batcher and policies the GPU runtime runs."""
