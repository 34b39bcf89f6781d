// same.mjs A B: exit 1 when the generated types A differ from B (the
// document's types made again): src/schema.d.ts is stale.
import { readFileSync } from "node:fs";
const [a, b] = process.argv.slice(2);
if (readFileSync(a, "utf8") !== readFileSync(b, "utf8")) {
  console.error(`${a} is stale: run npm run generate in clients/typescript`);
  process.exit(1);
}
