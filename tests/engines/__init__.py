"""Real engines and simulated servers for the tests: how each kind is launched, and a pool that shares them."""
