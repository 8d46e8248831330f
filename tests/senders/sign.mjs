// GitHub's signature of stdin under the secret argv[2], by @octokit/webhooks-methods:
// prints the X-Hub-Signature-256 value ("sha256=<hex>").
import { sign } from "@octokit/webhooks-methods";

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const payload = Buffer.concat(chunks).toString("utf8");
process.stdout.write(await sign(process.argv[2], payload));
