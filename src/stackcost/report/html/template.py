"""The Jinja2 page of the HTML report. Autoescaped: every value from the store is text.

Only two things are inserted unescaped (`|safe`): plotly.js itself and the figures' JSON,
which slots.py escapes for a <script> element (every '<' becomes \\u003c).
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>
  :root { --fg: #1d1d1f; --muted: #666; --line: #ddd; --bad: #fde2e1; --warn: #fff4d6; }
  body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif;
         color: var(--fg); margin: 0 auto; padding: 1rem 2rem 4rem; max-width: 1400px;
         line-height: 1.4; }
  h1 { margin-bottom: .2rem; }
  h2 { border-bottom: 2px solid var(--line); padding-bottom: .2rem; margin-top: 2.5rem; }
  h3 { margin-bottom: .4rem; }
  nav a { margin-right: 1rem; }
  .muted, .note { color: var(--muted); }
  .note { font-style: italic; }
  .sc-plot { width: 100%; min-height: 460px; }
  .scroll { overflow-x: auto; }
  table { border-collapse: collapse; font-size: .85rem; margin: .5rem 0 1rem; }
  th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: right;
           vertical-align: top; }
  th { background: #f5f5f7; }
  td.text, th.text { text-align: left; }
  tr.status-wrong td, td.status-wrong { background: var(--bad); }
  tr.invalid td { color: #8a1c1c; }
  tr.untrusted td { background: var(--warn); }
  tr.status-disturbed td { color: #6a3d9a; }
  tr.status-skipped td, tr.status-unavailable td, tr.status-unsupported td { color: var(--muted); }
  td.best { font-weight: bold; }
  td.slower { background: var(--bad); color: #a40000; font-weight: bold; }
  pre { white-space: pre-wrap; word-break: break-word; background: #f7f7f7; padding: .5rem;
        font-size: .8rem; max-height: 20rem; overflow: auto; }
  .counts span { margin-right: 1.2rem; }
  ul.notes { font-size: .85rem; color: var(--muted); margin-top: 0; }
  ul.notes li.busy { color: #a40000; font-weight: bold; }
  details.ops { margin: .3rem 0; }
  details.ops > summary { cursor: pointer; }
</style>
</head>
<body data-figure-count="{{ figures|length }}">
<h1>{{ title }}</h1>
<p class="muted">Generated {{ generated_at }} · baseline backend <b>{{ baseline }}</b> ·
  {{ runs|length }} run{{ "" if runs|length == 1 else "s" }}:
  {% for r in runs %}<code>{{ r.run_id }}</code>{{ ", " if not loop.last }}{% endfor %}</p>

{{ suite }}

{% if not has_cells and not training and not scenarios and not generation and not serving and not advice %}
<p class="note">No results: these runs have no stored repetitions.</p>
{% else %}
{% if has_cells %}<p class="counts">
  <span>{{ counts.cells }} cells</span><span>{{ counts.valid }} valid</span>
  <span>{{ counts.unstable }} unstable</span><span>{{ counts.disturbed }} disturbed</span>
  <span>{{ counts.wrong }} wrong</span><span>{{ counts.failed }} failed</span>
  <span>{{ counts.skipped }} skipped or not run</span>
</p>{% endif %}
<nav>{% for s in nav %}<a href="#{{ s[0] }}">{{ s[1] }}</a>{% endfor %}</nav>
{% if has_cells %}<p class="muted">Each repetition is a separate process. Lines are the median over repetitions
  of each repetition's median; shaded bands span the min to max of those medians. Only cells
  whose every repetition is "ok" or "unstable" have timings: "wrong", failed and skipped cells
  never do. A "disturbed" cell (other processes used its cores) shows its median marked †
  in the tables, but no plot, ratio or baseline uses it; a ratio over an "unstable"
  {{ baseline }} is marked ? and left out of the summaries.</p>{% endif %}
{% endif %}

{% macro plot(p) -%}
  {% if p.id %}<div class="sc-plot" id="{{ p.id }}"></div>{% endif %}
  {% if p.note %}<p class="note">{{ p.note }}</p>{% endif %}
{%- endmacro %}

{% macro notes(items) -%}
  {% if items %}<ul class="notes">{% for n in items %}<li{% if n.startswith("BUSY MACHINE") %} class="busy"{% endif %}>{{ n }}</li>{% endfor %}</ul>{% endif %}
{%- endmacro %}

{% if training %}
<h2 id="training">Training</h2>
<p class="muted">Each backend trained the same network from the same initial weights on the
  same batches. Time is in units of epoch × that backend's mean epoch time, as in the
  abstraction-cost study; lines are the mean over repetitions, bands their min to max.
  Time per sample is the median over epochs; loader wait and step time are per epoch.</p>
{{ plot(training.accuracy) }}
{{ plot(training.summary) }}
{{ plot(training.agreement) }}
{% endif %}

{% if scenarios %}
<h2 id="scenarios">Deployment scenarios (MLPerf LoadGen)</h2>
<p class="muted">{{ scenario_caption }}.</p>
<div class="scroll"><table>
  <tr>{% for h in scenario_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in scenarios %}
  <tr class="status-{{ row.status }}">{% for v in row.cols %}<td class="text">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% endif %}

{% if advice %}
<h2 id="advice">Advice</h2>
<p class="muted">What `stackcost advise` recommended, how it was decided, and every cell of its search space with the phase that decided it. Screening rows are one short process each; estimated rows were never run (linear in batch between two screened batches).</p>
{% for a in advice %}
<h3>{{ a.model }} <span class="muted">({{ a.id }})</span></h3>
<p class="{{ 'ok' if a.recommended else 'bad' }}"><strong>{{ a.headline }}</strong></p>
<ul class="notes">{% for line in a.lines %}<li>{{ line }}</li>{% endfor %}</ul>
{{ plot(a.plot) }}
<div class="scroll"><table>
  <tr>{% for h in a.header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in a.rows %}
  <tr>{% for v in row %}<td class="text">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% endfor %}
{% endif %}

{% if generation %}
<h2 id="generation">Token generation</h2>
<p class="muted">{{ generation_caption }}.</p>
<div class="scroll"><table>
  <tr>{% for h in generation_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in generation %}
  <tr class="status-{{ row.status }}">{% for v in row.cols %}<td class="text">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% if generation_pareto %}
<h3>Quantized decoding: speedup against quality lost</h3>
<p class="muted">Speedup: the same rung's fp32 TPOT p50 over this cell's. Quality lost: the held-out perplexity increase `stackcost heldout` stored for these weights, rung and precision, where every point has one; else the share of generated tokens whose top-1 differs from eager fp32's.</p>
{{ plot(generation_pareto) }}
{% endif %}
{% endif %}

{% if serving %}
<h2 id="serving">Serving under load</h2>
<p class="muted">{{ serving_caption }}.</p>
{% for line in serving_slo %}<p>{{ line }}</p>{% endfor %}
<div class="scroll"><table>
  <tr>{% for h in serving_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in serving %}
  <tr class="status-{{ row.status }}">{% for v in row.cols %}<td class="text">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% for p in serving_plots %}{{ plot(p) }}{% endfor %}
{% endif %}

{% if has_cells %}
<h2 id="latency">Latency</h2>
{{ plot(plots.latency_batch) }}
{% for axis in size_axes %}{{ plot(plots["latency_" ~ axis]) }}{% if not loop.last %}
{% endif %}{% endfor %}

<h2 id="throughput">Throughput</h2>
{{ plot(plots.throughput_batch) }}
{% for axis in size_axes %}{{ plot(plots["throughput_" ~ axis]) }}{% if not loop.last %}
{% endif %}{% endfor %}
<h3>Throughput per batch size (samples/s)</h3>
<p class="muted">Median throughput in samples/s. Colour runs orange (lowest) to green (highest)
  within each batch-size column, independently of other columns; the best in a column is
  bold.</p>
{% for t in throughput_tables %}
<div class="scroll"><table class="throughput">
  <caption class="text">{{ t.title }}</caption>
  <tr><th class="text" rowspan="2">backend</th>
    <th colspan="{{ t.columns|length }}">throughput (samples/s) at batch size (samples)</th></tr>
  <tr>{% for b in t.columns %}<th>{{ b }}</th>{% endfor %}</tr>
  {% for row in t.rows %}
  <tr><td class="text">{{ row.series }}</td>
    {% for c in row.cells %}<td style="{{ c.style }}"{% if c.best %} class="best"{% endif %}>{{ c.text }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% else %}<p class="note">No valid throughput to tabulate.</p>
{% endfor %}
{% if study_tables %}
<h3 id="study">Frameworks across machines, per batch size</h3>
<p class="muted">The inference-framework study's tables: one per batch size, frameworks as
  rows; colour runs orange (worst) to green (best) over the whole table.</p>
{% for t in study_tables %}
<div class="scroll"><table class="throughput study">
  <caption class="text">{{ t.title }}</caption>
  <tr><th class="text">framework</th>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr>
  {% for row in t.rows %}
  <tr><td class="text">{{ row.series }}</td>
    {% for c in row.cells %}<td style="{{ c.style }}"{% if c.best %} class="best"{% endif %}>{{ c.text }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
<p class="note">{{ t.note }}</p>
{% endfor %}
{{ plot(plots.machine_ratios) }}
{% endif %}

<h2 id="memory">Memory</h2>
{{ plot(plots.memory_batch) }}
{% for axis in size_axes %}{{ plot(plots["memory_" ~ axis]) }}{% if not loop.last %}
{% endif %}{% endfor %}
{% if not has_device_memory %}<p class="note">No device memory on CPU: every cell ran on
  the CPU, so only peak RSS (process resident memory, MiB) is shown.</p>{% endif %}

<h2 id="ratios">Ratio to {{ baseline }}</h2>
<p class="muted">Per model, each backend's time, CPU memory (peak RSS) and device memory
  (allocator peak) divided by {{ baseline }}'s on the same workload; bars are the geometric
  mean over workloads, whiskers their min and max. The dashed line at 1.0 is {{ baseline }};
  below 1 is better for time and memory. Only workloads where {{ baseline }} is "ok" count:
  a ratio over an unstable or disturbed {{ baseline }} would not be a measurement.</p>
{{ plot(plots.ratios) }}

<h2 id="startup">Cold start and startup</h2>
<p class="muted">Cold start = the first call (Inductor compiles here); startup = the backend's
  prepare step (export, AOT compile) plus the first call. Milliseconds, log scale.</p>
{{ plot(plots.startup) }}

<h2 id="verification">Verification</h2>
<p class="muted">Max relative error = max|out − ref| / max|ref| against eager fp32, per cell
  (the worst repetition), with the tolerance of its precision.
  {{ verification.ok }} of {{ verification.checked }} verified cells are within tolerance.</p>
{{ plot(plots.verification) }}
{% if verification.rows %}
<div class="scroll"><table>
  <caption class="text">Cells outside tolerance</caption>
  <tr>{% for h in verification.header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in verification.rows %}
  <tr class="status-wrong">{% for v in row %}<td class="text">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% endif %}

{% if quantization %}
<h2 id="quantization">Quantized precisions</h2>
<p class="muted">Each quantized cell against the same rung's fp32 cell on the same batch,
  sizes and threads: its speedup (fp32's median latency / its own; below 1× it is slower
  than fp32, marked in red and never averaged away), its weights in MB (10^6 bytes) beside
  the same weights in fp32, and its accuracy cost against eager fp32: top-1 agreement (% of
  rows whose argmax agrees), softmax KL (nats) and max relative error. A quantized cell is
  judged by its acceptance rule, not the fp32 tolerance; one outside it is "wrong" and has
  no valid timing.</p>
{% for line in quantization.isa %}<p class="muted isa">{{ line }}</p>{% endfor %}
{{ plot(quantization.plot) }}
{% for t in quantization.tables %}
<div class="scroll"><table class="quant-study">
  <caption class="text">{{ t.title }}: quantized precisions</caption>
  <tr><th class="text">framework</th>{% for h in t.header %}<th>{{ h }}</th>{% endfor %}</tr>
  {% for row in t.rows %}
  <tr><td class="text">{{ row.series }}</td>
    {% for c in row.cells %}<td{% if c.slower %} class="slower"{% endif %}>{{ c.text }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
<p class="note">{{ quantization.table_note }}</p>
{% endfor %}
<h3>What each rung built</h3>
<div class="scroll"><table class="quant-cells">
  <tr>{% for h in quantization.header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in quantization.rows %}
  <tr class="status-{{ row.status }}">{% for v in row.cols %}<td class="text{% if row.slower and loop.index0 == quantization.slower_col %} slower{% endif %}">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{{ notes(quantization.notes) }}
{% endif %}

<h2 id="failures">Failures</h2>
{% if failures %}
<div class="scroll"><table>
  <tr>{% for h in failure_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for f in failures %}
  <tr class="status-{{ f.status }} invalid">{% for v in f.cols %}<td class="text">{{ v }}</td>{% endfor %}
    <td class="text">{{ f.reason }}{% if f.log_tail %}<details><summary>log</summary><pre>{{ f.log_tail }}</pre></details>{% endif %}</td></tr>
  {% endfor %}
</table></div>
{% else %}<p class="note">No failures: every cell measured a timing.</p>
{% endif %}

<h2 id="untrusted">Unstable and disturbed cells</h2>
<p class="muted">"unstable": verified, but the time cap stopped it or its warmup never
  settled; its timing is used, and a ratio over it is marked ?. "disturbed": other processes
  used its cores during the timed loop; its median is shown marked † and used nowhere.</p>
{% if untrusted %}
<div class="scroll"><table>
  <tr>{% for h in untrusted_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for u in untrusted %}
  <tr class="status-{{ u.status }} untrusted">{% for v in u.cols %}<td class="text">{{ v }}</td>{% endfor %}
    <td class="text">{{ u.reason }}</td></tr>
  {% endfor %}
</table></div>
{% else %}<p class="note">None: every measured cell is ok, so every ratio is trusted.</p>
{% endif %}

{% if best_batches is not none %}
<h2 id="best-batch">Best batch size by doubling search</h2>
<p class="muted">Runs with find_max_batch: per series, the batch size with the highest median
  throughput, and what ended the search (OOM or timeout prunes larger batches).</p>
{% if best_batches %}
<div class="scroll"><table>
  <tr>{% for h in best_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in best_batches %}
  <tr>{% for v in row %}<td class="text">{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% else %}<p class="note">No series had a valid result.</p>{% endif %}
{% endif %}

<h2 id="cells">All cells</h2>
<details><summary>{{ cell_rows|length }} cells, one row each (units in the headers)</summary>
<div class="scroll"><table>
  <tr>{% for h in cell_header %}<th class="text">{{ h }}</th>{% endfor %}</tr>
  {% for row in cell_rows %}
  <tr class="status-{{ row.status }} {{ row.kind }}">
    {% for v in row.cols %}<td{% if loop.index <= cell_text_columns %} class="text"{% elif loop.index0 == row.slower %} class="slower"{% endif %}>{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{{ notes(cell_marks) }}
</details>

<h2 id="costs">Where the time goes</h2>
<p class="muted">From <code>--profile</code> runs: a separate profiled pass after each cell's
  timed loop splits one iteration into parts; FLOPs and (estimated) bytes of one call place
  the cell under this machine's measured peaks; a side-channel sampler gives CPU use and
  energy over the timed loop. Only valid cells appear.</p>
{% if costs.note %}<p class="note">{{ costs.note }}</p>{% endif %}
{% if costs.profiled %}
<h3>Breakdown per iteration</h3>
{{ plot(costs.plots.breakdown) }}
{{ notes(costs.notes.breakdown) }}

<h3>Top operators</h3>
{% for t in costs.op_tables %}
<details class="ops"><summary>{{ t.title }}: {{ t.summary }}</summary>
<p class="muted">{{ t.method }}</p>
<div class="scroll"><table>
  <tr>{% for h in t.header %}<th{% if loop.first %} class="text"{% endif %}>{{ h }}</th>{% endfor %}</tr>
  {% for row in t.rows %}
  <tr>{% for v in row %}<td{% if loop.first %} class="text"{% endif %}>{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{{ notes(t.notes) }}
</details>
{% else %}<p class="note">No operator tables: no profiled cell has a breakdown.</p>
{% endfor %}

<h3>Roofline</h3>
{{ plot(costs.plots.roofline) }}
{{ notes(costs.notes.roofline) }}

<h3>Share of the measured peak</h3>
{% if costs.peak_rows %}
<p class="muted">Achieved GFLOP/s = FLOPs of one batch / median step time; peak = this
  machine's best GEMM at the cell's thread count and precision, or for a cuda cell its GPU's
  matmul peak at the cell's precision (fp32 with TF32 off, tf32, bf16, or fp16 — amp too;
  median of CUDA-event-timed calls), named in the last column (measured by stackcost, not a
  datasheet figure).</p>
<div class="scroll"><table class="peak">
  <tr>{% for h in costs.peak_header %}<th{% if loop.index <= 3 or loop.last %} class="text"{% endif %}>{{ h }}</th>{% endfor %}</tr>
  {% for row in costs.peak_rows %}
  <tr>{% for v in row %}<td{% if loop.index <= 3 or loop.last %} class="text"{% endif %}>{{ v }}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% else %}<p class="note">No profiled cell has an achieved GFLOP/s.</p>{% endif %}

<h3>CPU utilization</h3>
{{ plot(costs.plots.utilization) }}
{{ notes(costs.notes.utilization) }}

<h3>Energy</h3>
{{ plot(costs.plots.energy) }}
{{ notes(costs.notes.energy) }}
{% for t in costs.best_tables %}
<div class="scroll"><table class="best-backend">
  <caption class="text">{{ t.title }}</caption>
  <tr><th class="text" rowspan="2">workload</th>
    <th colspan="{{ t.columns|length }}">best backend (value) at batch size (samples)</th></tr>
  <tr>{% for b in t.columns %}<th>{{ b }}</th>{% endfor %}</tr>
  {% for row in t.rows %}
  <tr><td class="text">{{ row.label }}</td>
    {% for c in row.cells %}<td class="text"><b>{{ c.text }}</b>{% if c.value %} {{ c.value }}{% endif %}</td>{% endfor %}</tr>
  {% endfor %}
</table></div>
{% endfor %}
{% endif %}

<h3>Thread scaling</h3>
{{ plot(costs.plots.scaling) }}
{{ notes(costs.notes.scaling) }}
{% endif %}

<h2 id="environment">Environment</h2>
{% for r in runs %}
<h3>Run <code>{{ r.run_id }}</code></h3>
{% if r.env %}
<div class="scroll"><table>
  {% for k, v in r.env %}<tr><th class="text">{{ k }}</th><td class="text">{{ v }}</td></tr>{% endfor %}
</table></div>
{% else %}<p class="note">No environment recorded.</p>{% endif %}
<details><summary>spec</summary><pre>{{ r.spec }}</pre></details>
{% endfor %}

<script>{{ plotlyjs|safe }}</script>
{% for f in figures %}<script type="application/json" class="sc-figure" data-target="{{ f.id }}">{{ f.json|safe }}</script>
{% endfor %}
<script>
(function () {
  var pending = [];
  document.querySelectorAll("script.sc-figure").forEach(function (s) {
    var fig = JSON.parse(s.textContent);
    var div = document.getElementById(s.getAttribute("data-target"));
    pending.push(Plotly.newPlot(div, fig.data, fig.layout,
                                {responsive: true, displaylogo: false}));
  });
  Promise.all(pending).then(function () {
    document.body.setAttribute("data-rendered", String(pending.length));
  });
})();
</script>
</body>
</html>
"""
