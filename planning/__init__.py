"""Capacity planning: `spsim plan`. For each configuration (policy x GPU x model x settings) the
highest request rate that meets an SLO, the fewest replicas for a target rate, goodput per GPU
and per dollar, the Pareto front of throughput against latency, and what limits each winner.

Files, one concept each: `space` (the configurations and their hashes), `probe` (one simulated
run at one rate, cached), `cache` (probe records on disk), `search` (the rate search and the
replica search), `limits` (what limits a configuration, in words), `prices` (the price table),
`pareto`, `recommend` (winners per objective, recommendation.json/.md), `sweep` (a process pool
or Ray), `report` (the HTML report), `cli` (the command). See docs/planning.md.
"""
