"""Chapter 02: judging a solution (teaching cells only: the judge is :mod:`cascadekit.verify.process`)."""
