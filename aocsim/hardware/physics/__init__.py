"""The laws the parts obey: one pure function per pipeline stage, noise formulas and sources, the optics
folded into operators, time and energy prices. Imports profiles only."""
