"""What the tests share: simulations, fake shells and ports, real-client helpers (imported as
``support.x``; tests/ is on pytest's path)."""
