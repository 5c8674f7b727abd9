// Writes the licences of the libraries bundled into the console (THIRD-PARTY-LICENSES.txt beside
// the built files): run by `npm run build`.
import { readFileSync, writeFileSync, existsSync } from "node:fs";

const bundled = ["react", "react-dom", "scheduler", "@xyflow/react", "@xyflow/system", "classcat", "zustand", "use-sync-external-store",
  "d3-drag", "d3-selection", "d3-zoom", "d3-dispatch", "d3-interpolate", "d3-color", "d3-ease", "d3-timer", "d3-transition"];
let text = "Third-party software bundled into console.js and console.css (name, version, licence):\n";
for (const name of bundled) {
  const dir = `node_modules/${name}`;
  if (!existsSync(dir)) continue;
  const pkg = JSON.parse(readFileSync(`${dir}/package.json`, "utf8"));
  const file = ["LICENSE", "LICENSE.md", "LICENSE.txt", "license"].map((f) => `${dir}/${f}`).find(existsSync);
  text += `\n==== ${name} ${pkg.version} (${pkg.license}) ====\n${file ? readFileSync(file, "utf8") : "(no licence file shipped)"}\n`;
}
writeFileSync("../gateway/console/static/THIRD-PARTY-LICENSES.txt", text);
