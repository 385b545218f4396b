"""The virtual AOC, in three rooms whose imports point one way (docs/ARCHITECTURE.md):

- `profiles`: what a machine is (its typed components, the schema derived from them, loading and
  checking profile files, the twin import);
- `physics`: the laws its parts obey (pipeline stages, noise formulas and sources, optics folding,
  energy), pure functions of the device's typed components (`DeviceProfile.parts`);
- `engine`: running it (keyed random streams, programming the SLM, the iteration and its backends,
  the loop, tiles, probes, the noise budget).

profiles <- physics <- engine: profiles import nothing of the other two, physics nothing of the engine.
"""
