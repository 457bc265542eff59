"""The machine plugin's object under its first entry point's name (``nodeagent_sim.machine:MACHINE``): it lives in
:mod:`nodeagent_sim_machine`, which loads without the rest of the simulator."""

from nodeagent_sim_machine import MACHINE, SimMachine

__all__ = ["MACHINE", "SimMachine"]
