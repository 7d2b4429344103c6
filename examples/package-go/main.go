// A Go program using rabbitmq-retry's components as a package (docs/components.md, "From other languages").
// Add the package first, from this folder: it generates the SDK under sdks/ and prints the `go mod edit -replace`
// line that makes the import below resolve to it; use the import path it prints.
//
//	pulumi package add github.com/<owner>/rabbitmq-retry/pulumi-plugin@v0.1.0
//
// Running it needs the Pulumi CLI, Go and a broker: it was not run here.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"

	rabbitmqretry "example.com/pulumi-rabbitmq-retry/sdk/go/rabbitmqretry"
)

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		cfg := config.New(ctx, "")
		shop, err := rabbitmqretry.NewVhost(ctx, "shop", &rabbitmqretry.VhostArgs{
			Vhost: &rabbitmqretry.VhostSpec{
				Name:      "shop",
				Exchanges: []rabbitmqretry.ExchangeSpec{{Name: "orders", Type: "topic"}},
				Queues: []rabbitmqretry.QueueSpec{{
					// A delay per retry, 1s, 2s, 4s, … up to 5m (± 20 %), through the vhost's shared delay levels.
					Name:     "orders.refunds",
					Type:     pulumi.StringRef("quorum"),
					Bindings: []rabbitmqretry.BindingSpec{{Exchange: "orders", RoutingKey: pulumi.StringRef("order.refunded")}},
					Retry: &rabbitmqretry.RetrySpec{
						Strategy:       pulumi.StringRef("levels"),
						Backoff:        &rabbitmqretry.BackoffSpec{Initial: pulumi.StringRef("1s"), Max: pulumi.StringRef("5m")},
						MaxRetries:     pulumi.IntRef(6),
						ErrorRetention: pulumi.StringRef("168h"),
					},
				}},
				DelayLevels: &rabbitmqretry.DelayLevelsSpec{Unit: pulumi.StringRef("1s"), MaxDelay: pulumi.StringRef("1h")},
				Applications: []rabbitmqretry.ApplicationSpec{{
					User:      "refunds-app",
					Publishes: []string{"orders"},
					Consumes:  []string{"orders.refunds"},
					Limits:    &rabbitmqretry.UserLimitsSpec{MaxConnections: pulumi.IntRef(10)},
				}},
			},
			// pulumi config set --secret refundsAppPassword <password>
			Passwords:     pulumi.StringMap{"refunds-app": cfg.RequireSecret("refundsAppPassword")},
			ProtectQueues: pulumi.BoolRef(true),
		})
		if err != nil {
			return err
		}
		// The retry contract of each retryable queue, by queue name, typed.
		ctx.Export("retryContracts", shop.RetryContracts)
		return nil
	})
}
