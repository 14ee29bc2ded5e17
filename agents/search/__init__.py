"""The budgeted beam search (AccelOpt's loop with KernelSkill's repairer and logbook)."""
