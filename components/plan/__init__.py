"""Planning a vhost from its parsed config: the plan, its retry paths, its resource layout, the effective
policies, the preview-time checks and the alerting rules. Pure: no Pulumi."""
