"""Running the machine: keyed random streams, SLM programming and static draws, the one iteration and its
backends, the loop, optical tiles, probes and the noise budget. Imports profiles and physics."""
