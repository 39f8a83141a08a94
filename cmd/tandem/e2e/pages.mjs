// The demo page in a real browser (Debian's Chromium driven by
// playwright-core), for the tests that drive it.
import { before, after } from "node:test"
import assert from "node:assert/strict"
import { chromium } from "playwright-core"
import { defer } from "./server.mjs"

let browser

// useBrowser starts one Chromium for the calling test file, closed when
// the file's tests end.
export function useBrowser() {
  before(async () => {
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
    })
  })
  after(() => browser?.close())
}

// openDemo loads the demo in a fresh browser context (its own storage, so
// its own user) with the query's parameters, and waits until the editor is
// connected and showing a document. Uncaught errors in the page fail the
// test.
export async function openDemo(t, url, { query = "", height = 560 } = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1100, height } })
  defer(t, () => ctx.close())
  const page = await ctx.newPage()
  const errors = []
  page.on("pageerror", e => errors.push(e.message))
  defer(t, () => assert.deepEqual(errors, [], "uncaught errors in the page"))
  const u = new URL(url)
  for (const [k, v] of new URLSearchParams(query)) u.searchParams.set(k, v)
  await page.goto(u.toString())
  await page.waitForSelector(".cm-content")
  await page.waitForSelector('#connection[data-state="open"]')
  return page
}
