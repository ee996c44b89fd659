"""Python tooling of the streamhnsw project: cluster manager, data, demo, tests."""
