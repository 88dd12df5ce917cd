"""`hyrl sweep`: one recipe at several batch sizes (`run`), its command line (`cli`), the members
planned (`plan`), the recipe asked (`probe`), sweep.json and the member directories
(`record`)."""
