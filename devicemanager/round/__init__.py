"""The round as two pure steps around the shell's I/O: `plan` (what to ask the libraries), then
`learn` and `settle` (what they answered into the round's snapshot, its figures and its log
events). What one round hands the next is one frozen value, `Memory`."""
