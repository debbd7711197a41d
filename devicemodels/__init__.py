"""Device models: the physics of the testbed (flash FTL with GC, FDP, ZNS, CXL)."""
