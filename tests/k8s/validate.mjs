// Validates Kubernetes manifests against the API's JSON schemas (kubernetes-models, generated from
// the Kubernetes OpenAPI spec): every document must be a known kind and pass its schema (types,
// required fields, enums; the schemas let unknown fields pass, as the API server's non-strict
// decoding does), and the wsyncd DaemonSet must hold to what the deployment promises. Exits 1
// naming every problem.
//
//   node tests/k8s/validate.mjs FILE...
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { ConfigMap, Pod } from "kubernetes-models/v1";
import { DaemonSet } from "kubernetes-models/apps/v1";

const kinds = { "v1/ConfigMap": ConfigMap, "v1/Pod": Pod, "apps/v1/DaemonSet": DaemonSet };
const problems = [];
let checked = 0;

// What the wsyncd DaemonSet must do beyond its schema (README "Deployment").
function checkDaemonSet(where, ds) {
  const pod = ds.spec.template;
  const c = pod.spec.containers.find((x) => x.name === "wsyncd");
  if (!c) return problems.push(`${where}: no container named wsyncd`);
  for (const part of [c.resources?.limits, c.resources?.requests]) {
    for (const key of Object.keys(part ?? {})) {
      if (key.startsWith("nvidia.com/")) {
        problems.push(`${where}: requests ${key}: it must see every GPU of the node and take none`);
      }
    }
  }
  const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]));
  if (env.NVIDIA_VISIBLE_DEVICES !== "all") problems.push(`${where}: NVIDIA_VISIBLE_DEVICES is not "all"`);
  if (!pod.spec.hostIPC) problems.push(`${where}: hostIPC is off (CUDA IPC needs it)`);
  const annotations = pod.metadata?.annotations ?? {};
  if (annotations["prometheus.io/scrape"] !== "true") problems.push(`${where}: no scrape annotation`);
  const port = annotations["prometheus.io/port"];
  if (!(c.args ?? []).some((a) => a.startsWith("--metrics-listen=") && a.endsWith(`:${port}`))) {
    problems.push(`${where}: --metrics-listen does not serve the annotated port ${port}`);
  }
  for (const probe of ["livenessProbe", "readinessProbe"]) {
    const cmd = (c[probe]?.exec?.command ?? []).join(" ");
    if (!cmd.includes("wsyncctl") || !cmd.includes("health")) {
      problems.push(`${where}: ${probe} is not a wsyncctl health check`);
    }
  }
}

for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"));
  docs.forEach((doc, i) => {
    const where = `${file} document ${i + 1}`;
    if (doc.errors.length) return problems.push(`${where}: ${doc.errors.join("; ")}`);
    const obj = doc.toJS();
    if (obj === null) return;
    const Kind = kinds[`${obj.apiVersion}/${obj.kind}`];
    if (!Kind) return problems.push(`${where}: ${obj.apiVersion} ${obj.kind} is not checked here`);
    try {
      new Kind(obj).validate();
    } catch (e) {
      return problems.push(`${where} (${obj.kind} ${obj.metadata?.name}): ${e.message}`);
    }
    if (obj.kind === "DaemonSet" && obj.metadata?.name === "wsyncd") checkDaemonSet(where, obj);
    checked++;
  });
}
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log(`${checked} manifest(s) valid`);
