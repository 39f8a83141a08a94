/** Where a {@link ActivityMonitor} watches for activity: a window, or a fake in tests. */
export interface ActivityTarget {
  addEventListener(type: string, listener: () => void, options?: { passive?: boolean }): void
  removeEventListener(type: string, listener: () => void): void
}

/** Tells whether the page is hidden; `document` in a browser. */
export interface Visibility extends ActivityTarget {
  readonly hidden: boolean
}

/** Events on the window that count as the user being active. */
export const ACTIVITY_EVENTS = ["pointerdown", "pointermove", "keydown", "wheel", "touchstart", "focus"]

/**
 * Decides whether the local user is "online" (active) or "away": away after
 * `idleMs` without input, or at once when the page is hidden; online again on
 * the next input or when the page is shown. Calls `onChange` on each change.
 */
export class ActivityMonitor {
  #status: "online" | "away" = "online"
  #idleMs: number
  #target: ActivityTarget
  #visibility: Visibility | undefined
  #onChange: (status: "online" | "away") => void
  #lastInput = Date.now()
  #timer: ReturnType<typeof setTimeout> | undefined

  constructor(opts: {
    idleMs: number
    target: ActivityTarget
    visibility?: Visibility
    onChange: (status: "online" | "away") => void
  }) {
    this.#idleMs = opts.idleMs
    this.#target = opts.target
    this.#visibility = opts.visibility
    this.#onChange = opts.onChange
    for (const e of ACTIVITY_EVENTS) this.#target.addEventListener(e, this.#onInput, { passive: true })
    this.#visibility?.addEventListener("visibilitychange", this.#onVisibility)
    if (this.#visibility?.hidden) this.#set("away")
    this.#arm(this.#idleMs)
  }

  /** The current status. */
  get status(): "online" | "away" {
    return this.#status
  }

  /** Records activity that arrives by other means (e.g. an editor's own events). */
  poke(): void {
    this.#onInput()
  }

  stop(): void {
    for (const e of ACTIVITY_EVENTS) this.#target.removeEventListener(e, this.#onInput)
    this.#visibility?.removeEventListener("visibilitychange", this.#onVisibility)
    clearTimeout(this.#timer)
  }

  #onInput = (): void => {
    this.#lastInput = Date.now()
    if (this.#status === "away" && !this.#visibility?.hidden) this.#set("online")
  }

  #onVisibility = (): void => {
    if (this.#visibility?.hidden) this.#set("away")
    else this.#onInput()
  }

  // One timer per idle period rather than one per input event: when it
  // fires it checks how long ago the last input was.
  #arm(ms: number): void {
    clearTimeout(this.#timer)
    this.#timer = setTimeout(() => {
      const idle = Date.now() - this.#lastInput
      if (idle >= this.#idleMs) {
        this.#set("away")
        this.#arm(this.#idleMs)
      } else {
        this.#arm(this.#idleMs - idle)
      }
    }, ms)
  }

  #set(s: "online" | "away"): void {
    if (this.#status === s) return
    this.#status = s
    this.#onChange(s)
  }
}
