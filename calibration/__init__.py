"""Calibration: sweeps of pass compositions on the GPU, fitted into cost models (`spsim calibrate`)."""
