/** The p-quantile (0–1) of ascending `sorted`, to 0.1; 0 for an empty list. */
export const pct = (sorted: number[], p: number): number =>
  sorted.length === 0 ? 0 : Number(sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!.toFixed(1));

/** The values in ascending order (a copy). */
export const ascending = (values: number[]): number[] => [...values].sort((a, b) => a - b);

/** The middle value (the upper one of an even count), unrounded; 0 for an empty list. */
export const median = (values: number[]): number => ascending(values)[Math.floor(values.length / 2)] ?? 0;
