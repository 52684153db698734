"""What the tests share: the CLI runner, argv facts, fake engines and servers, process helpers,
fixture hosts, the hostile zoo, wheels and Prometheus."""
