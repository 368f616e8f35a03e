#!/usr/bin/env python3
"""deploy/check/taskdef_shape.py FILE...: each ECS task definition against
the RegisterTaskDefinition input of botocore's ECS service model (what
`aws ecs register-task-definition --cli-input-json` accepts): unknown
members, missing required ones, wrong types, values outside an enum.
Offline: the model ships inside botocore. One "ok"/"not ok" line per file;
exit 1 when any fails."""
import json
import sys

import botocore.session
from botocore.validate import ParamValidator


def enum_errors(value, shape, where):
    """botocore's validator leaves enums to the service: check them here."""
    if shape.type_name == "structure" and isinstance(value, dict):
        for k, v in value.items():
            if k in shape.members:
                yield from enum_errors(v, shape.members[k], f"{where}.{k}")
    elif shape.type_name == "list" and isinstance(value, list):
        for i, v in enumerate(value):
            yield from enum_errors(v, shape.member, f"{where}[{i}]")
    elif shape.type_name == "string" and shape.enum and isinstance(value, str) and value not in shape.enum:
        yield f"{where}: {value!r} is not one of {', '.join(shape.enum)}"


def main(files):
    model = botocore.session.get_session().get_service_model("ecs")
    shape = model.operation_model("RegisterTaskDefinition").input_shape
    failed = 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                params = json.load(f)
            report = ParamValidator().validate(params, shape)
            problems = "\n".join([report.generate_report()] if report.has_errors() else [])
            problems = "\n".join([problems, *enum_errors(params, shape, "input")]).strip()
        except (OSError, ValueError) as e:
            problems = str(e)
        if problems:
            failed += 1
            print(f"not ok - {path}: RegisterTaskDefinition shape (botocore {botocore.__version__}): "
                  + " | ".join(line.strip() for line in problems.splitlines() if line.strip()))
        else:
            print(f"ok - {path}: RegisterTaskDefinition shape (botocore {botocore.__version__})")
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
