module shop-queues

go 1.22

require github.com/pulumi/pulumi/sdk/v3 v3.272.0
