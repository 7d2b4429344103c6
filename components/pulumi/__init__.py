"""The Pulumi layer, the only one that imports Pulumi: the ComponentResources, the resources they register, the
guard's hooks, the program's settings and the plugin host; the pure layers' errors become `pulumi.RunError` here
(`boundary.py`)."""
