// Builds the demo page into web/static, which the server embeds:
// node web/demo/build.mjs (npm run build:web).
import { build } from "esbuild"
import { copyFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const out = join(here, "..", "static")

await build({
  entryPoints: { app: join(here, "main.ts") },
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  // Automerge's "webpack" build inlines its wasm as base64, so the bundle is
  // one self-contained file and needs no bundler support for wasm.
  conditions: ["webpack"],
  // The demo is built from the client's sources: the package's exports
  // point at its compiled dist/, which only its own build makes.
  alias: { "@tandemhq/client": join(here, "..", "client", "src", "index.ts") },
  minify: true,
  legalComments: "linked",
  outdir: out,
  logLevel: "warning",
})
await build({
  entryPoints: { app: join(here, "style.css") },
  bundle: true,
  minify: true,
  outdir: out,
  logLevel: "warning",
})
copyFileSync(join(here, "index.html"), join(out, "index.html"))
