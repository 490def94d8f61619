"""The simulated world: SimPy clock, replicas and router, a cost model (spsim.cost: time) and an
acceptance model (spsim.acceptance: outcomes) behind the same batcher and policies the GPU runtime
runs. It never imports the runtime (docs/architecture.md)."""
