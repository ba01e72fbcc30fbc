// deploy/'s container image and Kubernetes files, read for tests/test_deploy_kubernetes.cpp and
// tests/test_deploy_image.cpp: node deploy_manifests.mjs DEPLOY_DIR prints one JSON object:
// - dockerfile: the Dockerfile's problems as the Docker language server's linter sees them
//   (dockerfile-utils: unknown instructions, bad flags, signals, ports, JSON forms...), and its
//   stages, each with its instructions and their arguments (dockerfile-ast; `json`: the strings
//   of an exec form such as ENTRYPOINT ["a", "b"], else null);
// - manifests: every document of DEPLOY_DIR/kubernetes/*.yaml, with `errors`: what parsing it
//   and validating it against its kind's schema (kubernetes-models: Kubernetes' OpenAPI schemas;
//   @kubernetes-models/prometheus-operator: the CRDs' schemas) found, and every field the
//   schema does not name (unknown_fields.mjs); a kind with no schema here is an error;
// - adapter: DEPLOY_DIR/prometheus-adapter.yaml, parsed.
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DockerfileParser } from 'dockerfile-ast';
import { validate as lintDockerfile } from 'dockerfile-utils';
import { parseAllDocuments, parse } from 'yaml';
import { Deployment } from 'kubernetes-models/apps/v1';
import { Service } from 'kubernetes-models/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodMonitor } from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import { unknownFields } from './unknown_fields.mjs';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node deploy_manifests.mjs DEPLOY_DIR');
  process.exit(2);
}

// Each kind's model, and the declaration of its type that unknown_fields.mjs walks.
const modules = join(dirname(fileURLToPath(import.meta.url)), 'node_modules');
const models = {
  Deployment: [Deployment, 'kubernetes-models/apps/v1/Deployment.d.ts', 'IDeployment'],
  Service: [Service, 'kubernetes-models/v1/Service.d.ts', 'IService'],
  HorizontalPodAutoscaler: [HorizontalPodAutoscaler,
    'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler.d.ts', 'IHorizontalPodAutoscaler'],
  PodMonitor: [PodMonitor,
    '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor.d.ts', 'IPodMonitor'],
};

function dockerfile(path) {
  const text = readFileSync(path, 'utf8');
  const severities = { 1: 'error', 2: 'warning', 3: 'information', 4: 'hint' };
  const problems = lintDockerfile(text).map((d) => ({
    line: d.range.start.line + 1,
    severity: severities[d.severity] ?? String(d.severity),
    message: d.message,
  }));
  const stages = [];
  for (const instruction of DockerfileParser.parse(text).getInstructions()) {
    const keyword = instruction.getKeyword();
    if (keyword === 'FROM') stages.push({ instructions: [] });
    if (stages.length === 0) continue;  // ARG before the first FROM
    const strings = typeof instruction.getJSONStrings === 'function'
      ? instruction.getJSONStrings() : [];
    const json = strings.length ? strings.map((s) => s.getJSONValue()) : null;
    stages.at(-1).instructions.push({
      keyword,
      line: instruction.getRange().start.line + 1,
      flags: typeof instruction.getFlags === 'function'
        ? Object.fromEntries(instruction.getFlags().map((f) => [f.getName(), f.getValue()]))
        : {},
      args: instruction.getArguments().map((a) => a.getValue()),
      text: instruction.getArgumentsContent() ?? '',
      json,
    });
  }
  return { problems, stages };
}

function manifests(folder) {
  const out = [];
  for (const file of readdirSync(folder).filter((f) => /\.ya?ml$/.test(f)).sort()) {
    const docs = parseAllDocuments(readFileSync(join(folder, file), 'utf8'));
    docs.forEach((doc, index) => {
      const errors = doc.errors.map((e) => e.message);
      const object = errors.length ? null : doc.toJS();
      if (object) {
        const [Model, declarations, type] = models[object.kind] ?? [];
        const known = Model && Model.apiVersion === object.apiVersion;
        if (!known) errors.push(`no schema here for ${object.apiVersion} ${object.kind}`);
        else {
          try {
            new Model(object).validate();
          } catch (e) {
            errors.push(e.message);
          }
          for (const field of unknownFields(object, join(modules, declarations), type, modules))
            errors.push(`${field}: no such field in ${object.apiVersion} ${object.kind}`);
        }
      }
      out.push({ file, index, object, errors });
    });
  }
  return out;
}

console.log(JSON.stringify({
  dockerfile: dockerfile(join(dir, 'Dockerfile')),
  manifests: manifests(join(dir, 'kubernetes')),
  adapter: parse(readFileSync(join(dir, 'prometheus-adapter.yaml'), 'utf8')),
}, null, 1));
