"""What to run, validated: the grammar of options, RunSpec and TrainSpec, YAML spec files and
suite files. Nothing here measures, probes or writes; every bad value is a one-line SpecError."""
