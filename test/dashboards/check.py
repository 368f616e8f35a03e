# test/dashboards/check.py ROOT SCRAPES EMF DOC: the checks of
# test/integration/dashboards.sh (which says what they are). ROOT: a tree
# with deploy/grafana/payflow.json, deploy/aws/observability.yaml,
# deploy/ecs/payflow-metrics.json and workers/src; SCRAPES: a folder of
# /metrics answers, *.prom; EMF: the metrics task's line; DOC:
# payflow.metrics(). One ok/not ok line per check, exit 1 when any failed.
import glob
import json
import os
import re
import sys

import yaml

failures = 0


def ok(what, passed, why=""):
    global failures
    print(f"{'ok' if passed else 'not ok'} - {what}{'' if passed or not why else f' ({why})'}")
    if not passed:
        failures += 1
    return passed


def all_clear(what, problems):
    """one check for a list of problems: ok when there is none"""
    return ok(what, not problems, "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else ""))


root, scrape_dir, emf_file, doc_file = sys.argv[1:5]

# ------------------------------------------------------------ what the programs export

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')
samples = {}        # sample name -> set of label names
types = {}          # family -> TYPE
bad_lines = []
for f in sorted(glob.glob(os.path.join(scrape_dir, "*.prom"))):
    for line in open(f, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line or line.startswith("# HELP "):
            continue
        m = re.match(r"^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$", line)
        if m:
            types[m.group(1)] = m.group(2)
            continue
        m = SAMPLE.match(line)
        if not m:
            bad_lines.append(f"{os.path.basename(f)}: {line[:80]}")
            continue
        samples.setdefault(m.group(1), set()).update(LABEL.findall(m.group(3) or ""))
all_clear("the scrapes are Prometheus text", bad_lines)
# a histogram's samples: F_bucket (le), F_sum, F_count
kind = {}
for name in samples:
    fam = re.sub(r"_(bucket|sum|count)$", "", name)
    if fam != name and types.get(fam) == "histogram":
        kind[name] = "histogram " + name[len(fam) + 1:]
    else:
        kind[name] = types.get(name, "untyped")
ok(f"the programs export {len(samples)} sample names, at least 50 (payflow-api's own and payflow.metrics() flattened, payflow-worker's)",
   len(samples) >= 50, ", ".join(sorted(samples)))
ok("payflow-api read payflow.metrics() (payflow_up)", "payflow_up" in samples and any(
    re.match(r"^payflow_up 1$", line.strip()) for f in glob.glob(os.path.join(scrape_dir, "*.prom")) for line in open(f)))

# every family the C sources print is in the scrapes, with the type they give it
printed = {}
for f in glob.glob(os.path.join(root, "workers/src/**/*.c"), recursive=True):
    text = open(f, encoding="utf-8").read()
    for m in re.finditer(r"# TYPE (payflow_[a-z0-9_]+) (counter|gauge|histogram)", text):
        printed[m.group(1)] = m.group(2)
    for m in re.finditer(r'\{\s*"(payflow_[a-z0-9_]+)",\s*"(counter|gauge|histogram)"', text):
        printed[m.group(1)] = m.group(2)
ok(f"workers/src prints {len(printed)} typed families, at least 15", len(printed) >= 15, ", ".join(sorted(printed)))
all_clear("the scrapes hold every family workers/src prints, of its type",
          [f"{n} ({t}): {types.get(n, 'absent')}" for n, t in sorted(printed.items()) if types.get(n) != t])

# the fixture reached every branch of payflow.metrics(): each key path (data
# keys such as statuses and steps taken as one) has a number somewhere, or it
# would be missing from the scrape (nulls carry no gauge)
doc = json.load(open(doc_file))
paths = {}


def walk(v, path):
    if isinstance(v, dict):
        for k, x in v.items():
            walk(x, path + ("*" if k[:1].isupper() else k,))
    elif not isinstance(v, list):
        paths.setdefault(".".join(path), set()).add(type(v).__name__)


walk(doc, ())
all_clear(f"the fixture gives each of the {len(paths)} paths of payflow.metrics() a value",
          [p for p, t in paths.items() if not t & {"int", "float", "bool", "str"}])

# ------------------------------------------------------------ PromQL

FUNCTIONS = set("""abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp
clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv
exp floor histogram_avg histogram_count histogram_fraction histogram_quantile histogram_stddev histogram_stdvar
histogram_sum holt_winters hour idelta increase irate label_join label_replace last_over_time ln log10 log2
mad_over_time max_over_time min_over_time minute month pi predict_linear present_over_time quantile_over_time
rad rate resets round scalar sgn sin sinh sort sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time
stdvar_over_time sum_over_time tan tanh time timestamp vector year""".split())
AGGREGATIONS = set("sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio".split())
RANGE_FUNCTIONS = {"rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets", "predict_linear"} | {
    f for f in FUNCTIONS if f.endswith("_over_time")}
COUNTING = {"rate", "irate", "increase"}
TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<dur>(?:\d+(?:ms|[smhdwy]))+)(?![\w.])
  | (?P<num>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<var>\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=@,()\[\]{}])
  | (?P<bad>.)""", re.X)
# Grafana's interval variables stand for a duration
DURATION_VARIABLES = {"$__rate_interval", "${__rate_interval}", "$__interval", "${__interval}", "$__range", "${__range}"}


def promql_problems(expr):
    """what is wrong with expr: names payflow does not export, counters without
    rate(), gauges inside one, histogram buckets outside histogram_quantile, ..."""
    problems = []
    toks = [(m.lastgroup, m.group()) for m in TOKEN.finditer(expr) if m.lastgroup != "ws"]
    stack = []          # open calls and parentheses: {"fn": name or None, "by": [labels]}
    pending = None      # an aggregation whose by/without clause comes first
    last_closed = None
    i = 0

    def group_end(i, open_, close):
        depth = 0
        for j in range(i, len(toks)):
            depth += toks[j][1] == open_
            depth -= toks[j][1] == close
            if depth == 0:
                return j
        problems.append(f"unbalanced {open_}")
        return len(toks) - 1

    while i < len(toks):
        kind_, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind_ == "bad":
            problems.append(f"unexpected {text!r}")
        elif kind_ == "var" and text not in DURATION_VARIABLES:
            problems.append(f"Grafana variable {text} outside a string")
        elif text == "(":
            stack.append(pending or {"fn": None, "by": []})
            pending = None
        elif text == ")":
            if stack:
                last_closed = stack.pop()
            else:
                problems.append("unbalanced )")
        elif kind_ == "ident" and text in ("by", "without", "on", "ignoring", "group_left", "group_right"):
            if nxt == "(":
                j = group_end(i + 1, "(", ")")
                labels = [t for k, t in toks[i + 2:j] if k == "ident"]
                if text in ("by", "without"):
                    target = pending if pending is not None else last_closed
                    if target is not None:
                        target["by"] = labels if text == "by" else ["<without>"]
                i = j
        elif kind_ == "ident" and text in ("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "Inf", "NaN"):
            pass
        elif kind_ == "ident" and nxt == "(":
            if text not in FUNCTIONS | AGGREGATIONS:
                problems.append(f"{text}() is no PromQL function")
            stack.append({"fn": text, "by": []})
            i += 1
        elif kind_ == "ident" and text in AGGREGATIONS and nxt in ("by", "without"):
            pending = {"fn": text, "by": []}
        elif kind_ == "ident":
            # a metric name, its matchers, maybe a range
            name, labels, j = text, [], i + 1
            if j < len(toks) and toks[j][1] == "{":
                end = group_end(j, "{", "}")
                labels = [t for k, t in toks[j + 1:end] if k == "ident"]
                j = end + 1
            ranged = j < len(toks) and toks[j][1] == "["
            if ranged:
                j = group_end(j, "[", "]") + 1
            i = j - 1
            problems.extend(selector_problems(name, labels, ranged, list(stack)))
        i += 1
    if stack:
        problems.append("unbalanced (")
    return problems


def selector_problems(name, labels, ranged, stack):
    if name not in samples:
        if types.get(name) == "histogram":
            return [f"{name} is a histogram: name its _bucket, _sum or _count"]
        return [f"{name} is no metric payflow exports"]
    out = []
    for label in labels:
        if label not in samples[name] and label not in ("__name__", "job", "instance"):
            out.append(f"{name} has no label {label}")
    calls = [e for e in stack if e["fn"]]
    inner = calls[-1]["fn"] if calls else None
    k = kind[name]
    if inner in RANGE_FUNCTIONS and not ranged:
        out.append(f"{inner}() of {name} without a range")
    if ranged and inner not in RANGE_FUNCTIONS:
        out.append(f"{name}[...] is a range where {inner or 'the query'} wants an instant vector")
    counts = k == "counter" or k.startswith("histogram ") or (k == "untyped" and name.endswith("_total"))
    if inner in COUNTING and not counts:
        out.append(f"{inner}() of {name} ({k}): only counters count")
    if (k == "counter" or k.startswith("histogram ")) and inner not in COUNTING:
        out.append(f"{name} ({k}) is read without rate() or increase()")
    if k == "histogram bucket":
        if not any(e["fn"] == "histogram_quantile" for e in calls):
            out.append(f"{name} outside histogram_quantile()")
        for e in calls:
            if e["fn"] in AGGREGATIONS and "le" not in e["by"]:
                out.append(f"{name}: {e['fn']}() inside histogram_quantile() must keep le (by (..., le))")
    return out


# ------------------------------------------------------------ the Grafana dashboard

grafana_file = os.path.join(root, "deploy/grafana/payflow.json")
try:
    dash = json.load(open(grafana_file, encoding="utf-8"))
except (OSError, ValueError) as e:
    dash = None
    ok("deploy/grafana/payflow.json parses as JSON", False, str(e))
if dash is not None:
    ok("deploy/grafana/payflow.json parses as JSON", True)
    ok("grafana: a dashboard (title, uid, schemaVersion 36 or later, panels)",
       isinstance(dash, dict) and bool(dash.get("title")) and re.fullmatch(r"[A-Za-z0-9_-]{1,40}", str(dash.get("uid"))) is not None
       and isinstance(dash.get("schemaVersion"), int) and dash["schemaVersion"] >= 36 and isinstance(dash.get("panels"), list))
    variables = (dash.get("templating") or {}).get("list") or []
    ds_vars = [v.get("name") for v in variables if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    ok(f"grafana: a Prometheus data source variable ({', '.join(ds_vars) or 'none'})", len(ds_vars) == 1)
    ds_ref = "${%s}" % (ds_vars[0] if ds_vars else "datasource")

    def uses_variable(d):
        return isinstance(d, dict) and d.get("type") == "prometheus" and d.get("uid") == ds_ref

    panels = []
    for p in dash.get("panels") or []:
        panels.append(p)
        panels.extend(p.get("panels") or [])   # a collapsed row holds its panels
    ids = [p.get("id") for p in panels]
    ok(f"grafana: {len(panels)} panels, each with its own integer id",
       all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids),
       ", ".join(str(i) for i in sorted(set(ids), key=str) if ids.count(i) > 1 or not isinstance(i, int)))
    layout, cells = [], {}
    for p in dash.get("panels") or []:
        g = p.get("gridPos") or {}
        if not all(isinstance(g.get(k), int) for k in "xywh") or not (g["x"] >= 0 and g["y"] >= 0 and 1 <= g["w"] and g["x"] + g["w"] <= 24 and g["h"] >= 1):
            layout.append(f"panel {p.get('id')}: gridPos {g}")
            continue
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    layout.append(f"panels {cells[(x, y)]} and {p.get('id')} overlap")
                cells[(x, y)] = p.get("id")
    all_clear("grafana: every panel inside the 24 columns, none over another", sorted(set(layout)))
    shape, names, queries = [], set(), []
    for p in panels:
        if p.get("type") == "row":
            continue
        where = f"panel {p.get('id')} ({p.get('title')!r})"
        targets = p.get("targets")
        if not p.get("title"):
            shape.append(f"{where}: no title")
        if not isinstance(targets, list) or not targets:
            shape.append(f"{where}: no targets")
            continue
        if not uses_variable(p.get("datasource")):
            shape.append(f"{where}: data source is not {ds_ref}")
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or not all(refs):
            shape.append(f"{where}: refIds {refs}")
        for t in targets:
            if not isinstance(t.get("expr"), str) or not t["expr"].strip():
                shape.append(f"{where} {t.get('refId')}: no expr")
            elif not uses_variable(t.get("datasource", p.get("datasource"))):
                shape.append(f"{where} {t.get('refId')}: data source is not {ds_ref}")
            else:
                queries.append((f"{where} {t['refId']}", t["expr"]))
    all_clear("grafana: every panel has a title and targets, each a PromQL expr on the Prometheus variable", shape)
    for v in variables:
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            if v.get("definition") is not None:
                ok(f"grafana: variable {v.get('name')}: its definition is its query", v["definition"] == q)
            m = re.fullmatch(r"\s*label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*", str(q))
            if not ok(f"grafana: variable {v.get('name')} is label_values(<selector>, <label>) on {ds_ref}",
                      m is not None and uses_variable(v.get("datasource")), str(q)):
                continue
            queries.append((f"variable {v.get('name')}", m.group(1)))
            sel = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", m.group(1))
            if sel and sel.group(1) in samples:
                ok(f"grafana: variable {v.get('name')}: {sel.group(1)} has the label {m.group(2)}", m.group(2) in samples[sel.group(1)])
    bad = []
    for where, expr in queries:
        bad.extend(f"{where}: {p}" for p in promql_problems(expr))
        names.update(t for t in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)) if t in samples)
    all_clear(f"grafana: each of the {len(queries)} queries is PromQL that names only what payflow exports, counters through rate()/increase(), histograms by le",
              bad)
    # what issue 29 asks the dashboard to show
    wanted = {"backlog": "payflow_steps_pending", "outbox backlog": "payflow_outbox_backlog",
              "oldest operation": "payflow_operations_oldest_age_seconds", "oldest outbox event": "payflow_outbox_oldest_age_seconds",
              "step latencies": "payflow_steps_run_seconds_p95", "failure rate": "payflow_failure_rate_last_hour",
              "retries": "payflow_steps_retry_waiting", "dead letters": "payflow_dead_letters_open",
              "a step limit's running": "payflow_steps_limit_slots_held", "a step limit's held": "payflow_steps_limit_held",
              "breaker state": "payflow_steps_breaker_open", "API requests": "payflow_api_requests_total",
              "API latency": "payflow_api_request_duration_seconds_bucket", "workers": "payflow_worker_messages_held"}
    all_clear("grafana: shows backlog, ages, step latencies, failure rate, retries, dead letters, limits, breakers, the API and the workers",
              [f"{what} ({m})" for what, m in wanted.items() if m not in names])
    print(f"# not on the Grafana dashboard: {', '.join(sorted(set(samples) - names)) or 'nothing'}")

# ------------------------------------------------------------ the CloudWatch dashboard

emf = json.loads(open(emf_file).read())
directive = emf["_aws"]["CloudWatchMetrics"][0]
published = {m["Name"] for m in directive["Metrics"]}
published_dims = [sorted(d) for d in directive["Dimensions"]]
ok(f"the metrics task publishes {len(published)} metrics in namespace {directive['Namespace']} (its EMF line, from this database)",
   len(published) >= 5 and all(isinstance(emf.get(n), (int, float)) for n in published), ", ".join(sorted(published)))

tpl_file = os.path.join(root, "deploy/aws/observability.yaml")
tpl = yaml.safe_load(open(tpl_file, encoding="utf-8"))
res = tpl.get("Resources") or {}
params = tpl.get("Parameters") or {}
boards = [(k, r) for k, r in res.items() if r.get("Type") == "AWS::CloudWatch::Dashboard"]
if ok("observability.yaml: one AWS::CloudWatch::Dashboard", len(boards) == 1, str(len(boards))):
    props = boards[0][1].get("Properties") or {}
    name_sub = (props.get("DashboardName") or {}).get("Fn::Sub", "")
    ok("observability.yaml: the dashboard's name is payflow-${Environment}", name_sub == "payflow-${Environment}", str(props.get("DashboardName")))
    body = (props.get("DashboardBody") or {}).get("Fn::Sub")
    ok("observability.yaml: DashboardBody is one Fn::Sub string", isinstance(body, str))
    body = body if isinstance(body, str) else ""
    alarms = {k for k, r in res.items() if r.get("Type") == "AWS::CloudWatch::Alarm"}
    PSEUDO = {"AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws",
              "AWS::URLSuffix": "amazonaws.com", "AWS::StackName": "payflow-prod-ObservabilityStack-1"}
    value_of, unknown = {}, []

    def substitute(m):
        var = m.group(1)
        if var.startswith("!"):
            return "${" + var[1:] + "}"
        if var in params:
            d = params[var]
            value_of[var] = str(d["Default"]) if "Default" in d else f"param-{var}"
            return value_of[var] if d.get("Type") == "Number" else json.dumps(value_of[var])[1:-1]
        if var in PSEUDO:
            return PSEUDO[var]
        res_name, _, attr = var.partition(".")
        if res_name in alarms and attr == "Arn":
            return f"arn:aws:cloudwatch:eu-west-1:123456789012:alarm:{res_name}"
        unknown.append(var)
        return ""

    text = re.sub(r"\$\{([^}]*)\}", substitute, body)
    all_clear("cloudwatch: every ${} of DashboardBody is a parameter, a pseudo parameter or an alarm's Arn", unknown)
    try:
        board = json.loads(text)
        ok("cloudwatch: DashboardBody is JSON", True)
    except ValueError as e:
        board = {}
        ok("cloudwatch: DashboardBody is JSON", False, str(e))
    widgets = board.get("widgets") if isinstance(board, dict) else None
    ok(f"cloudwatch: a list of widgets ({len(widgets or [])})", isinstance(widgets, list) and len(widgets) > 0)
    widgets = widgets if isinstance(widgets, list) else []

    # the dimensions each parameter stands for, as the alarms use them
    dim_params = {}

    def collect(node):
        if isinstance(node, dict):
            if isinstance(node.get("Dimensions"), list):
                for d in node["Dimensions"]:
                    if isinstance(d, dict) and isinstance(d.get("Value"), dict) and "Ref" in d["Value"]:
                        dim_params.setdefault(d.get("Name"), set()).add(d["Value"]["Ref"])
            for v in node.values():
                collect(v)
        elif isinstance(node, list):
            for v in node:
                collect(v)

    collect({k: r for k, r in res.items() if r.get("Type") == "AWS::CloudWatch::Alarm"})
    # metric filters of the stack: namespace -> metric names
    filtered = {}
    for r in res.values():
        if r.get("Type") == "AWS::Logs::MetricFilter":
            for t in r["Properties"].get("MetricTransformations") or []:
                filtered.setdefault(t["MetricNamespace"], set()).add(t["MetricName"])
    # The AWS services' metrics, as their documentation lists them (no file in
    # this repository knows them): SQS, Application Load Balancer, ECS
    # Container Insights; with the dimension sets the widgets may use.
    AWS_METRICS = {
        "AWS/SQS": ({"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesDelayed",
                     "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesVisible",
                     "NumberOfEmptyReceives", "NumberOfDeduplicatedSentMessages", "NumberOfMessagesDeleted",
                     "NumberOfMessagesReceived", "NumberOfMessagesSent", "SentMessageSize"},
                    [["QueueName"]]),
        "AWS/ApplicationELB": ({"ActiveConnectionCount", "ConsumedLCUs", "HTTPCode_ELB_4XX_Count", "HTTPCode_ELB_5XX_Count",
                                "HTTPCode_Target_2XX_Count", "HTTPCode_Target_3XX_Count", "HTTPCode_Target_4XX_Count",
                                "HTTPCode_Target_5XX_Count", "HealthyHostCount", "NewConnectionCount", "ProcessedBytes",
                                "RejectedConnectionCount", "RequestCount", "RequestCountPerTarget",
                                "TargetConnectionErrorCount", "TargetResponseTime", "UnHealthyHostCount"},
                               [["LoadBalancer"], ["LoadBalancer", "TargetGroup"], ["TargetGroup"]]),
        "ECS/ContainerInsights": ({"CpuReserved", "CpuUtilized", "DeploymentCount", "DesiredTaskCount",
                                   "EphemeralStorageReserved", "EphemeralStorageUtilized", "MemoryReserved",
                                   "MemoryUtilized", "NetworkRxBytes", "NetworkTxBytes", "PendingTaskCount",
                                   "RunningTaskCount", "StorageReadBytes", "StorageWriteBytes", "TaskSetCount"},
                                  [["ClusterName"], ["ClusterName", "ServiceName"]]),
    }
    td = json.load(open(os.path.join(root, "deploy/ecs/payflow-metrics.json")))
    log_group = td["containerDefinitions"][0]["logConfiguration"]["options"]["awslogs-group"].replace(
        "${Environment}", value_of.get("Environment", str(params.get("Environment", {}).get("Default"))))

    shape, unknown_metrics, fields, shown, queried, alarmed = [], [], [], set(), set(), []
    cells = {}
    for n, w in enumerate(widgets):
        where = f"widget {n} ({(w.get('properties') or {}).get('title', w.get('type'))!r})"
        if not all(isinstance(w.get(k), int) for k in ("x", "y", "width", "height")) or not (
                w["x"] >= 0 and w["y"] >= 0 and 1 <= w["width"] and w["x"] + w["width"] <= 24 and 1 <= w["height"] <= 1000):
            shape.append(f"{where}: position {[w.get(k) for k in ('x', 'y', 'width', 'height')]}")
        else:
            for x in range(w["x"], w["x"] + w["width"]):
                for y in range(w["y"], w["y"] + w["height"]):
                    if (x, y) in cells:
                        shape.append(f"{where} over widget {cells[(x, y)]}")
                    cells[(x, y)] = n
        p = w.get("properties") or {}
        t = w.get("type")
        if t == "text":
            if not isinstance(p.get("markdown"), str):
                shape.append(f"{where}: no markdown")
        elif t == "alarm":
            if not isinstance(p.get("alarms"), list) or not p["alarms"]:
                shape.append(f"{where}: no alarms")
            alarmed.extend(p.get("alarms") or [])
        elif t == "log":
            q = p.get("query")
            if not isinstance(q, str) or p.get("region") is None:
                shape.append(f"{where}: a query and a region")
                continue
            sources = re.findall(r"SOURCE\s+'([^']+)'", q)
            if not sources or any(s != log_group for s in sources):
                shape.append(f"{where}: queries {sources}, not the metrics task's {log_group}")
            for path in re.findall(r"\bpayflow((?:\.[A-Za-z0-9_]+)+)", q):
                v = emf.get("payflow")
                for k in path.strip(".").split("."):
                    v = v.get(k) if isinstance(v, dict) else None
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    fields.append(f"{where}: payflow{path} is {json.dumps(v)}")
                queried.add("payflow" + path)
        elif t == "metric":
            metrics = p.get("metrics")
            if not isinstance(metrics, list) or not metrics or p.get("region") is None:
                shape.append(f"{where}: metrics and a region")
                continue
            for m in metrics:
                if not isinstance(m, list) or not m:
                    shape.append(f"{where}: metric {m!r}")
                    continue
                opts = m[-1] if isinstance(m[-1], dict) else {}
                parts = m[:-1] if opts is m[-1] else m
                if "expression" in opts and not parts:
                    continue
                if len(parts) < 2 or len(parts) % 2 or not all(isinstance(x, str) for x in parts) or "." in parts or "..." in parts:
                    shape.append(f"{where}: {parts}: namespace, name, then dimension pairs, written out")
                    continue
                ns, metric = parts[0], parts[1]
                dims = dict(zip(parts[2::2], parts[3::2]))
                shown.add((ns, metric, tuple(sorted(dims.items()))))
                what = f"{where}: {ns} {metric} {dims}"
                if ns == directive["Namespace"]:
                    if metric not in published:
                        unknown_metrics.append(f"{what}: the metrics task does not publish it")
                    elif sorted(dims) not in published_dims or any(emf.get(k) != v for k, v in dims.items()):
                        unknown_metrics.append(f"{what}: published with the dimensions {published_dims} = "
                                               f"{ {k: emf.get(k) for d in published_dims for k in d} }")
                elif ns in filtered:
                    if metric not in filtered[ns] or dims:
                        unknown_metrics.append(f"{what}: the stack's metric filters make {sorted(filtered[ns])}, without dimensions")
                elif ns in AWS_METRICS:
                    names_, dim_sets = AWS_METRICS[ns]
                    if metric not in names_:
                        unknown_metrics.append(f"{what}: {ns} has no such metric")
                    elif sorted(dims) not in dim_sets:
                        unknown_metrics.append(f"{what}: {ns} dimensions are one of {dim_sets}")
                    else:
                        for k, v in dims.items():
                            if not any(value_of.get(x) == v for x in dim_params.get(k, ())):
                                unknown_metrics.append(f"{what}: {k} is none of the parameters the alarms use for it "
                                                       f"({', '.join(sorted(dim_params.get(k, ()))) or 'none'})")
                else:
                    unknown_metrics.append(f"{what}: a namespace neither the stack nor AWS writes")
        else:
            shape.append(f"{where}: type {t!r} is none of metric, log, alarm, text")
    all_clear("cloudwatch: every widget placed inside the 24 columns, none over another, and complete for its type", shape)
    all_clear("cloudwatch: every metric is one the stack publishes (Payflow, from the metrics task; its metric filters) "
              "or an AWS service's, with dimensions that exist", unknown_metrics)
    all_clear("cloudwatch: every Logs Insights field is a number of payflow.metrics() as the metrics task logs it", fields)
    arn = re.compile(r"^arn:aws:cloudwatch:eu-west-1:123456789012:alarm:(\w+)$")
    in_widget = {arn.match(a).group(1) for a in alarmed if isinstance(a, str) and arn.match(a)}
    all_clear(f"cloudwatch: the alarm widget shows each of the stack's {len(alarms)} alarms, by its Arn",
              sorted(alarms - in_widget) + [a for a in alarmed if not (isinstance(a, str) and arn.match(a))])
    # what issue 29 asks it to show: backlog and age of every queue, dead
    # letters, the outbox, failure rate, breakers, each step's latency
    queue_params = sorted(p for p in params if p.endswith("QueueName"))
    sqs = {(m, dict(d).get("QueueName")) for ns, m, d in shown if ns == "AWS/SQS"}
    missing = [f"{m} of {q}" for q in queue_params for m in ("ApproximateNumberOfMessagesVisible",)
               if (m, value_of.get(q)) not in sqs]
    missing += [f"ApproximateAgeOfOldestMessage of {q}" for q in queue_params
                if "DeadLetter" not in q and ("ApproximateAgeOfOldestMessage", value_of.get(q)) not in sqs]
    missing += [m for m in ("OutboxBacklog", "OutboxOldestAgeSeconds", "FailureRateLastHour", "BreakersOpen", "DeadLettersOpen")
                if not any(ns == directive["Namespace"] and x == m for ns, x, _ in shown)]
    missing += [f"payflow.steps.{s}.runSecondsP95" for s in doc.get("steps", {}) if f"payflow.steps.{s}.runSecondsP95" not in queried]
    all_clear("cloudwatch: shows every queue's backlog and age, every DLQ, the outbox, failure rate, breakers, dead letters "
              "and each step's run time", missing)

if failures:
    print(f"{failures} check(s) failed")
sys.exit(1 if failures else 0)
