"""`hyrl tune`: predict the fastest batch size from a short run, a decode profile and update
probes, instead of a full sweep. The command line is `cli`, the procedure `run`, the model
`model` (pure; its docstring gives every formula), the alignment check's verdicts `align`, the
report `report`."""
