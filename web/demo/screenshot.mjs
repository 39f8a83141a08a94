// Takes the README's screenshot of the demo with two users:
// node web/demo/screenshot.mjs http://127.0.0.1:8080 (a running tandem,
// best with a short --notify-window such as 1s, for the bell to light up).
import { chromium } from "playwright-core"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const base = process.argv[2] ?? "http://127.0.0.1:8080"
const out = join(dirname(fileURLToPath(import.meta.url)), "screenshot.png")
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
})
try {
  const page = async (url, name, color) => {
    const ctx = await browser.newContext({ viewport: { width: 1000, height: 420 } })
    const p = await ctx.newPage()
    const u = new URL(url)
    u.search = new URLSearchParams({ name, color, user: name.toLowerCase() }).toString()
    await p.goto(u.toString())
    await p.waitForSelector('#connection[data-state="open"]')
    return p
  }
  const ana = await page(`${base}/`, "Ana", "#e5484d")
  await ana.waitForFunction(() => location.hash.length > 1)
  const bo = await page(ana.url(), "Bo", "#0090ff")
  await ana.click(".cm-content")
  await ana.keyboard.press("Control+a")
  await ana.keyboard.type("Roadmap\n\n- Presence: cursors, selections, typing\n- Notifications\n- Benchmarks against the stock server\n")
  await bo.click(".cm-content")
  await bo.keyboard.press("Control+Home")
  await bo.keyboard.press("ArrowDown")
  await bo.keyboard.press("ArrowDown")
  await bo.keyboard.press("End")
  await bo.keyboard.press("Shift+Home")
  await ana.keyboard.type("- Offline edits")
  await ana.waitForSelector(".cm-remote-selection")
  await bo.keyboard.press("End")
  await bo.keyboard.type(" (done, thanks @ana)")
  await ana.waitForFunction(() => document.querySelector("#bell-count")?.textContent === "1", null, { timeout: 30_000 })
  await bo.keyboard.type(" ")
  await ana.waitForFunction(() => document.querySelector("#typing").textContent !== "")
  await ana.screenshot({ path: out })
  console.log(`wrote ${out}`)
} finally {
  await browser.close()
}
