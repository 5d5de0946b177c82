// Signs a body as a sender would and prints the header value(s) on one line each:
//   node sign.mjs '{"scheme":"stripe","secret":"whsec_…","body":"…","timestamp":1700000000}'
// stripe: the `stripe` package's own generateTestHeaderString (Stripe-Signature);
// slack: v0=hex HMAC-SHA256(secret, "v0:<timestamp>:<body>") (X-Slack-Signature), as
// Slack's "Verifying requests from Slack" computes it; shopify: base64 HMAC-SHA256(secret,
// body) (X-Shopify-Hmac-Sha256), as Shopify's webhook documentation computes it.
import { createHmac } from "node:crypto";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { scheme, secret, body, timestamp } = JSON.parse(process.argv[2]);

if (scheme === "stripe") {
  const stripe = require("stripe")("sk_test_unused");
  console.log(stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp }));
} else if (scheme === "slack") {
  console.log("v0=" + createHmac("sha256", secret).update(`v0:${timestamp}:${body}`).digest("hex"));
} else if (scheme === "shopify") {
  console.log(createHmac("sha256", secret).update(body).digest("base64"));
} else {
  console.error(`unknown scheme ${scheme}`);
  process.exit(2);
}
