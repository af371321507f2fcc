/** The blocks of `pages` (paths relative to `root`) that differ from their example file, as `page: file`. */
export function checkExampleBlocks(root: string, pages: string[]): string[];
