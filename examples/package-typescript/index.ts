// A TypeScript program using rabbitmq-retry's components as a package (docs/components.md, "From other
// languages"). Add the package first, from this folder (it generates the SDK under sdks/ and adds it to
// package.json and Pulumi.yaml):
//
//   pulumi package add github.com/<owner>/rabbitmq-retry/pulumi-plugin@v0.1.0
//
// Running it needs the Pulumi CLI, Node.js and a broker: it was not run here.
import * as pulumi from "@pulumi/pulumi";
import * as rabbitmqRetry from "@pulumi/rabbitmq-retry";

const config = new pulumi.Config();

const shop = new rabbitmqRetry.Vhost("shop", {
    vhost: {
        name: "shop",
        exchanges: [{ name: "orders", type: "topic" }],
        queues: [{
            // A delay per retry, 1s, 2s, 4s, … up to 5m (± 20 %), through the vhost's shared delay levels.
            name: "orders.refunds",
            type: "quorum",
            bindings: [{ exchange: "orders", routingKey: "order.refunded" }],
            retry: {
                strategy: "levels",
                backoff: { initial: "1s", max: "5m" },
                maxRetries: 6,
                errorRetention: "168h",
            },
        }],
        delayLevels: { unit: "1s", maxDelay: "1h" },
        // A change that would lose messages goes through a migration (docs/migrations.md). Lowering maxDelay to
        // "30m", say, drops a level: keep the old value here until what waits there has come back, then retire it:
        //   migrations: [{ name: "levels-to-30m", step: "drain", drainLevels: { maxDelay: "1h" } }],
        // A moved queue is `move: { from: "old", to: "new" }`; its step "move" runs from a Python stack (its
        // shovels need the stack's shovel user), its step "retire" from here.
        applications: [{
            user: "refunds-app",
            publishes: ["orders"],
            consumes: ["orders.refunds"],
            limits: { maxConnections: 10 },
        }],
    },
    // pulumi config set --secret refundsAppPassword <password>
    passwords: { "refunds-app": config.requireSecret("refundsAppPassword") },
    protectQueues: true,
});

// The retry contract of each retryable queue, by queue name, typed (contract.maxRetries, contract.backoff).
export const retryContracts = shop.retryContracts;
export const refundsMaxRetries = shop.retryContracts.apply(contracts => contracts["orders.refunds"].maxRetries);
