"""Coordinator: the multi-job engine, clocks, fleets, FedAvg, storage and the WebSocket server."""
