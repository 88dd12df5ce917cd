"""`hyrl tune`: predict the fastest batch size from a short run, a decode profile and update
probes, instead of a full sweep. One module per concern, in the order the steps run
(`run.run_tune` runs them; its docstring describes each step):

* `cli`: the command line, `hyrl tune RECIPE --out DIR [...] [-- FLAGS]`.
* `plan`: step 0, what is asked and refused before anything runs (`check_tune` -> `TunePlan`),
  and the members every later step runs.
* `members`: the runs tune starts, one at a time (a step as a `hyrl sweep`, one member, the
  update probes, the decode profile).
* `model`: the model, pure (no subprocess, no files); its docstring gives every formula.
* `prediction`: step 3, the model applied to what pass 1, the profile and the probes measured.
* `align`: step 4, the alignment check: its members' budgets, verdicts and runs.
* `verify`: step 5, `--verify`'s sweep against the prediction.
* `report`: report.json, report.md, the plots and the lines printed at the end.
"""
