"""The virtual AOC: device profiles, components, noise, the optical loop."""
